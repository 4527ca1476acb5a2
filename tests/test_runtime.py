"""The allocator setting of `nas.runtime`: batch-sized tensors reuse freed memory instead of fresh pages."""
import resource

import torch

from nas.runtime import keep_freed_memory

BIG = 40 << 20  # bytes: above glibc's largest automatic mmap threshold (32 MiB), like a batch of activations


def minor_faults_of_one_batch() -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    activations = [torch.ones(BIG, dtype=torch.uint8), torch.ones(BIG // 3, dtype=torch.uint8)]
    del activations
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_freed_memory_is_reused():
    assert keep_freed_memory()
    for _ in range(20):  # the heap settles (aligned allocations leave a few gaps at first)
        minor_faults_of_one_batch()
    pages = BIG // resource.getpagesize()
    faults = [minor_faults_of_one_batch() for _ in range(5)]
    assert max(faults) < pages // 10, faults  # glibc's default maps and faults in every page, every time
