"""This fork's own ports of upstream skyrl-train's example mains, written in upstream's form (hydra, a Ray task,
upstream's import paths and hook signatures). `test_upstream_ports.py` runs each as upstream's scripts run:
`python -m examples.<name>.main_<name> key=value ...` from the folder that holds this package."""
