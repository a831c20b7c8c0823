"""Hydra configs shipped inside the package (`pkg://damc.configs`); the checkout's `configs/` links here."""
