"""The harness's Hydra launcher (`hydra/launcher=ray`), found by Hydra in the `hydra_plugins` namespace.

`ray_launcher` is the Launcher Hydra loads; what a sweep does is the harness's own
(harness/driver/multirun.py).
"""

__all__ = ["ray_launcher"]
