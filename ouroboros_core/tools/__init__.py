"""The workbench around the engine: the benchmark, the app's load check, and the embedded pair's
training and card. Nothing in the engine imports from here."""
