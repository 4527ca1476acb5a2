"""How well the supernet ranks archs: `probe.py` trains a probe set of archs alone and rates the supernet's
ranking of them (Kendall tau, Spearman); `accuracy_predictor.py` predicts an arch's metric from its features.
"""
