"""Image input for models with a vision tower."""
