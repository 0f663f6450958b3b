"""A rank's memory on CPU, framework-free: its resident set now and at its peak, and the
address-space limit the memory probe runs it under (common/memory_probe.py). Linux only
(/proc and getrusage's kibibytes); elsewhere the readings are None."""

from __future__ import annotations

import ctypes
import os
import resource
import sys

# The per-process limit's own name in the records and in the probe's errors.
LIMIT_KIND = "RLIMIT_AS (virtual address space per rank process)"


def peak_rss_bytes() -> int | None:
    """The process's peak resident set since its program started (/proc/self/status'
    VmHWM): what its pages ever held at once, the interpreter and the libraries included.
    Not getrusage's ru_maxrss: Linux carries the parent's high-water mark into a child
    across fork and exec, so a rank started by a 390 MB process read 390 MB whatever it
    used itself."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def rss_bytes() -> int | None:
    """The resident set now (/proc/self/statm's second field, in pages)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


# glibc's mallopt parameter, and the size from which buffers get pages of their own.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024


def return_freed_memory() -> int | None:
    """Make every buffer of 128 KiB or more a mapping of its own, given back to the system
    when freed (glibc's mallopt M_MMAP_THRESHOLD, which also stops glibc raising that
    threshold as large buffers are freed). Without it a freed gathered layer stays in the
    heap, and the peak resident set counts the allocator's leftovers: FSDP over 2 ranks
    showed more memory per rank than DDP (gpt-mini: 854 and 1,003 MB against 804 and 835),
    and less with it (557 against 706), as its sharding should. The price is a mapping and
    its page faults per large tensor: about a fifth of a CPU run's throughput here
    (gpt-mini, 1 rank: 104 to 111 tokens/s against 137 to 140). Returns the threshold set,
    or None where glibc is not the allocator."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return MMAP_THRESHOLD if libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 else None
    except (OSError, AttributeError):
        return None


def limit_address_space(limit_bytes: int) -> None:
    """Cap this process's address space (soft and hard, so nothing it runs can raise it):
    an allocation past it fails in that process (an out-of-memory error), never in the
    machine's other processes. Inherited by the processes it starts."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
