"""Running jobs: everything between a composed config and a finished run directory.

A job (`job`) is driven in four stages (`run`): preflight (`preflight`: every check that can be made
before an episode runs; `resume`: what a resumed run carries on with, and what to type to resume),
session (`session`: Ray started or attached, the agent pool of `pool`: agent workers, the writer hub
of `hub` and the model limits, all `actors`), execute (`execute`: the job's agent runs on the pool,
watched, with a progress bar and the sweep's live view of `progress`), and finish (`manifest`,
summary, exit code). A sweep (`multirun`, handed over by Hydra's launcher in hydra_plugins/;
`until_decided` adds seeds until its comparisons are decided) runs its jobs side by side on one pool,
started as a single run's is (`session.start_pool`); `warm_pool` keeps one warm for the next command.
It also owns the directory lock (`lock`), the Ray metrics (`metrics`), the Hydra callbacks
(`callbacks`), the signals that stop a command (`signals`) and its start-up times (`startup`). What
happens inside one agent run is `harness.agent_run`'s. Its face (`__all__`) is what the commands,
Hydra and the bench use.
"""

__all__ = ["callbacks", "hydra_insides", "job", "multirun", "resume", "run", "session", "signals",
           "startup", "warm_pool"]
