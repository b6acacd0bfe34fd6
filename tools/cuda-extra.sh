#!/bin/sh
# Print the daskgpu extra whose GPU stack this machine's NVIDIA driver runs: cuda13 or cuda12.
# Print nothing where there is no nvidia-smi (a CPU-only install), and nothing but a line on
# stderr where the driver runs neither. The Makefile's EXTRAS uses it.
#
# The driver names the newest CUDA it runs in nvidia-smi's header ("CUDA Version: 13.0"); where
# the header lacks it, the driver's version decides (CUDA 13 needs >= 580, CUDA 12 >= 525).
# A newer driver still runs CUDA 13 builds. Shell built-ins only, besides nvidia-smi itself.

command -v nvidia-smi >/dev/null 2>&1 || exit 0

# The major number of the first line of stdin holding $1 (its first digits after $1).
first_major_after() {
    while IFS= read -r line; do
        case $line in
            *"$1"*)
                rest=${line#*"$1"}
                rest=${rest#"${rest%%[0-9]*}"}
                major=${rest%%[!0-9]*}
                if [ -n "$major" ]; then
                    echo "$major"
                    return
                fi
                ;;
        esac
    done
}

cuda=$(nvidia-smi 2>/dev/null | first_major_after "CUDA Version:")
if [ -z "$cuda" ]; then
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null \
        | first_major_after "")
    if [ "${driver:-0}" -ge 580 ]; then
        cuda=13
    elif [ "${driver:-0}" -ge 525 ]; then
        cuda=12
    fi
fi

if [ "${cuda:-0}" -ge 13 ]; then
    echo cuda13
elif [ "${cuda:-0}" -eq 12 ]; then
    echo cuda12
else
    echo "nvidia-smi found, but no driver for CUDA 12 or 13 (CUDA ${cuda:-unknown}):" \
        "installing without the GPU stack; set EXTRAS=cuda12,test or EXTRAS=cuda13,test" \
        "to choose one" >&2
fi
