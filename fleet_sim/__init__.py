"""The fleet simulator (`fa-sim`): simulated devices running the real device SDK against a server, the synthetic
data they hold (`scenarios`, `populations`, `urlbar_sim`) and the in-process evaluation tools built on that data
(`evaluate_heavy_hitters`, `evaluate_training`). Simulation only: nothing here ships in an app or the server.
Installed with the `sim` extra for the scikit-learn data-set scenarios."""
