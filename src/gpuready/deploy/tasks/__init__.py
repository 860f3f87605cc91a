"""``@deploy`` building blocks that the entry scripts in ``deploys/`` compose."""
