"""pyinfra facts (``FactBase`` subclasses) for what the deploys decide on."""
