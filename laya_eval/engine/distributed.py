"""Several processes, one evaluation: contiguous shards, reduced statistics, records gathered to rank 0.

Under ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous
variables) :func:`world_from_environment` joins the process group — gloo on the CPU,
NCCL on CUDA — and every rank evaluates the contiguous shard
``[floor(r N / W), floor((r + 1) N / W))`` of the N samples: no padded duplicates, shards
of unequal size are fine. Dataset statistics are all-reduced (float64 sums and counts)
before the effects that need them. Per-sample records are then gathered to every rank
and merged by sample index; the summary's costly parts (each method's scores and
intervals, each paired comparison) are shared out over the ranks with :meth:`World.map`
— each is seeded on its own, so how they are shared changes no number — and rank 0
assembles the tables and writes once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import torch

from laya_eval.engine.dataset_stats import DatasetStatistics
from laya_eval.errors import ConfigError
from laya_eval.engine.records import Records, merge_records

__all__ = ["SINGLE_PROCESS", "World", "serial_map", "shard_range", "world_from_environment"]

T = TypeVar("T")
R = TypeVar("R")


def serial_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``: :meth:`World.map` in one process."""
    return [fn(x) for x in items]


def shard_range(n: int, rank: int, size: int) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s contiguous shard of ``n`` samples among ``size`` ranks."""
    return (rank * n) // size, ((rank + 1) * n) // size


@dataclass(frozen=True)
class World:
    """This process's place among the processes of one evaluation.

    Attributes
    ----------
    rank, size : int
    local_rank : int
        The GPU index on this node for ``cuda`` runs.
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that keeps the tables and writes."""
        return self.rank == 0

    def shard(self, n: int) -> tuple[int, int]:
        """This rank's ``[start, stop)`` of ``n`` samples."""
        return shard_range(n, self.rank, self.size)

    def device(self, device: str) -> str:
        """``cuda`` becomes this rank's ``cuda:LOCAL_RANK`` when several processes share a node."""
        return f"cuda:{self.local_rank}" if self.size > 1 and device == "cuda" else device

    def all_reduce(self, stats: DatasetStatistics) -> DatasetStatistics:
        """The statistics summed over every rank (each rank gets the total)."""
        if self.size == 1:
            return stats
        import torch.distributed as dist

        names = sorted(stats.sums)
        out = {}
        for name in names:
            pairs = []
            for s, c in stats.sums[name]:
                s, c = s.clone(), c.clone()
                dist.all_reduce(s)
                dist.all_reduce(c)
                pairs.append((s, c))
            out[name] = pairs
        return DatasetStatistics(out)

    def sum_tensors(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each tensor summed over every rank (each rank gets the totals; the inputs are left as they are)."""
        if self.size == 1:
            return list(tensors)
        import torch.distributed as dist

        out = [t.clone() for t in tensors]
        for t in out:
            dist.all_reduce(t)
        return out

    def gather_objects(self, obj: object) -> list:
        """Every rank's ``obj``, in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        import torch.distributed as dist

        parts: list = [None] * self.size
        dist.all_gather_object(parts, obj)
        return parts

    def all_gather(self, records: Records) -> Records:
        """Every rank's records merged, on every rank."""
        if self.size == 1:
            return records
        import torch.distributed as dist

        parts: list = [None] * self.size
        dist.all_gather_object(parts, records)
        return merge_records(parts)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[fn(x) for x in items]`` on every rank, item ``i`` computed by rank ``i mod size``.

        Every rank must call it with the same items in the same order (it is a collective).
        """
        if self.size == 1:
            return serial_map(fn, items)
        import torch.distributed as dist

        mine = [fn(items[i]) for i in range(self.rank, len(items), self.size)]
        parts: list = [None] * self.size
        dist.all_gather_object(parts, mine)
        return [parts[i % self.size][i // self.size] for i in range(len(items))]

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()


SINGLE_PROCESS = World()


def world_from_environment(device: str = "cpu") -> World:
    """The :class:`World` torchrun describes in the environment (joining its process group), else one process.

    Raises
    ------
    ConfigError
        If the environment names several processes but the process group cannot be formed.
    """
    size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if size <= 1:
        return SINGLE_PROCESS
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if str(device).startswith("cuda") else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} was requested but no CUDA GPU is available; use --device cpu.")
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        try:
            dist.init_process_group(backend=backend)
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"cannot join the process group of {size} processes ({backend}): {exc}") from None
    return World(rank=dist.get_rank(), size=dist.get_world_size(), local_rank=local)
