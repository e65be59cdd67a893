"""specd."""
