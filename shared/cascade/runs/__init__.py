"""A run: its plan (configs x replicas -> sims), its results and the request estimates read from them."""
