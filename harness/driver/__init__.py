"""Running jobs: everything between a composed config and a finished run directory.

A job (`job`) is driven in four stages (`run`): preflight (every check that can be made before an
episode runs), session (Ray started or attached, the agent pool of `pool`: agent workers, the writer
hub and the model limits, all `actors`), execute (the job's agent runs on the pool, watched, with a
progress bar and the sweep's live view of `progress`), and finish (`manifest`, summary, exit code).
A sweep (`multirun`, handed over by Hydra's launcher in hydra_plugins/) runs its jobs side by side on
one pool, started as a single run's is (`session.start_pool`).
It also owns the directory lock (`lock`), the Ray metrics (`metrics`) and the Hydra callbacks
(`callbacks`). What happens inside one agent run is `harness.agent_run`'s.
"""
