"""Backend choice: which lowering a call uses."""

from __future__ import annotations


def resolve(backend: str, fname: str) -> str:
    """Resolve "auto" and check availability.

    Args:
      backend: "auto", "xla" or "wgsl" (already validated).
      fname: the public function name, for messages.

    Returns:
      "xla" or "wgsl".
    """
    if backend == "wgsl":
        raise NotImplementedError(
            f"{fname}: backend='wgsl' is not available yet; use backend='xla' or 'auto'."
        )
    return "xla"
