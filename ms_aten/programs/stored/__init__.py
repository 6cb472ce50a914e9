"""The capture cache on disk: a module's captured program stored without its weights, so that
a later process with the same model skips the capture (store.py), under a key of everything
that changes the program (key.py). docs/capture_cache.md."""
