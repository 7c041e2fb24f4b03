"""The loop's own state: per-target tracker, episodes, self stats, tick times, the async runner."""
