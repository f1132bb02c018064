"""The project's own rules: the layout of its code and its docs."""
