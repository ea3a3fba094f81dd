"""nginx in front of a model (`lab run --front nginx`): its config, its process, its knobs."""
