"""A small PyTorch training loop recorded with etr.torch (scripts/demo.sh, docs/TORCH.md).

usage: PYTHONPATH=<build>/python /usr/bin/python3 examples/torch/train.py --out trace.json
           [--steps N]
"""
import argparse

import torch

import etr
import etr.torch


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="trace file (.gz: gzip)")
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    with etr.torch.trace(a.out) as t:
        etr.thread_set_name("train")
        for step in range(a.steps):
            with torch.profiler.record_function("ProfilerStep#%d" % step):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
    print("etr.torch: %d ops of %d training steps -> %s" % (t.stats["ops_recorded"], a.steps,
                                                            a.out))


if __name__ == "__main__":
    main()
