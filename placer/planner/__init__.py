"""Planning: the ILP (problem.py builds plain arrays, ilp.py solves them), bounds, and baselines."""
