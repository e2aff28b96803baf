"""Where a CUDA training step's time goes (`gpu_check.py` writes it to reports/gpu/profile.txt): the
kernels of one eager step of each model by total GPU time, and the latency of one per-step product
and one elementwise kernel, each replayed in a CUDA graph. Needs a CUDA GPU.
"""

from __future__ import annotations

from pathlib import Path

import torch

from benchmarks import timing
from benchmarks import training_speed

REPO = Path(__file__).resolve().parents[1]


def profile(models: list[str]) -> str:
    """Where a training step's GPU time goes: the kernels of ours (eager) by total time, and the
    latency of one per-step product and one elementwise kernel, each replayed 200 times in a graph."""
    device = torch.device("cuda")
    out = []
    configs = timing.model_configs(str(REPO / "params.yaml"), models, 1)
    for name, config in configs.items():
        data = torch.randint(config.vocab_size, (64, 129), device=device)
        tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        _, step = training_speed.our_training_step(config, tokens, targets, device, graph=False)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        out.append(f"## {name}: kernels of one eager step\n")
        out.append(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))
    for hidden in (128, 256, 512, 768, 1024):
        for cols in (hidden, 2 * hidden, 4 * hidden):
            h = torch.randn(64, hidden, device=device)
            w = torch.randn(cols, hidden, device=device)
            acc = torch.randn(64, cols, device=device)
            out.append(f"addmm_ (64x{hidden}) @ ({hidden}x{cols}): {_graph_us(lambda: acc.addmm_(h, w.T)):.2f} us")
        x = torch.randn(64, hidden, device=device)
        out.append(f"sigmoid_ (64x{hidden}): {_graph_us(lambda: x.sigmoid_()):.2f} us")
    return "\n".join(out)


def _graph_us(fn, repeats: int = 200) -> float:
    """Microseconds per call of fn, replayed `repeats` times in one CUDA graph (median of 5 replays)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            fn()
    times = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / repeats)
    return sorted(times[1:])[2]
