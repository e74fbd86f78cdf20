"""Reference OpenEnv environments shipped with taskhub, one OpenEnv project folder each."""
