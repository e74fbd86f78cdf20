"""The relative_imports corpus env, a package as OpenEnv's envs are."""
