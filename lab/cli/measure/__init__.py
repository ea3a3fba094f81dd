"""The commands that measure (`lab run`, `lab plan`, `lab advise`, `lab routes`) and the inputs they
share: the run's options, the user's app and its traffic, resuming a run."""
