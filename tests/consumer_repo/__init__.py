"""Another repository's code, as a user of the export writes it: its own kernels, the exported
`<kernel>_configs` module on its path, nothing of the runner (never kernels/ or runners/)."""
