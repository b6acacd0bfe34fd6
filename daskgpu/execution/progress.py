"""Dask's text progress bar, drawn from the client's event loop while the caller waits.

``distributed.progress`` blocks until the scheduler's next progress message after the work is
done (up to its interval, 0.1 s), which would count in a run's compute time. Here the same
``TextProgressBar`` listens in the background on the client's own loop, and is ended as soon
as the results are in: the bar costs the run nothing but the scheduler's periodic message.
"""

from __future__ import annotations

INTERVAL = "100ms"


def _bar_class():
    from distributed.diagnostics.progressbar import TextProgressBar

    class EndableTextProgressBar(TextProgressBar):
        """distributed's bar, which draws nothing more once ended."""

        ended = False

        def _draw_bar(self, **kwargs):
            if not self.ended:
                super()._draw_bar(**kwargs)

    return EndableTextProgressBar


class ProgressBar:
    """A terminal progress bar (tasks done / total) of some futures.

    Call :meth:`start` once the futures exist, then :meth:`end` when their results arrived or
    never will.
    """

    def __init__(self, client):
        self.client = client
        self.bar = None

    def start(self, futures) -> None:
        """Begin drawing the progress of ``futures`` (returns at once)."""
        self.bar = _bar_class()(futures, scheduler=self.client.scheduler.address,
                                interval=INTERVAL, loop=self.client.loop, start=False)
        self.client.loop.add_callback(self.bar.listen)

    def end(self) -> None:
        """Stop drawing and clear the bar's line (on the loop that draws it, so nothing races)."""
        if self.bar is not None and not self.bar.ended:
            try:
                self.client.sync(self._end)
            except Exception:  # the client is already closing: nothing is drawn any more
                pass

    async def _end(self) -> None:
        self.bar.ended = True
        comm = getattr(self.bar, "comm", None)
        if comm is not None:
            comm.abort()
        self.bar._draw_stop()
