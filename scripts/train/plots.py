"""Loss curves as PNG (matplotlib, no display needed)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _draw(ax, metrics: dict, label: str) -> None:
    curve, val = metrics["curve"], metrics["val_curve"]
    ax.plot([p["tokens"] / 1e6 for p in curve], [p["loss"] for p in curve], lw=0.8, alpha=0.7,
            label=f"{label} train")
    ax.plot([p["tokens"] / 1e6 for p in val], [p["loss"] for p in val], "o-", ms=3,
            label=f"{label} validation (final {metrics['final_val_loss']:.3f})")


def _finish(fig, ax, title: str, path: Path) -> None:
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def loss_png(metrics: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    _draw(ax, metrics, metrics["name"])
    _finish(fig, ax, f"{metrics['name']}: {metrics['params'] / 1e6:.2f}M parameters", path)


def both_png(results: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for dirname, metrics in results.items():
        _draw(ax, metrics, dirname)
    _finish(fig, ax, "kiln's shipped models", path)
