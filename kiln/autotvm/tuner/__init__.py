"""Tuners (TVM paper §5): random, grid search, genetic algorithm, and XGBoost cost model with
simulated annealing. All share `Tuner.tune(n_trial, measure_option=None, early_stopping=None,
callbacks=(), log_file=None, measure_batch=None)`.

Example:
    >>> from kiln.autotvm.tuner import XGBTuner
    >>> XGBTuner(task).tune(n_trial=200, log_file="tune.jsonl")        # doctest: +SKIP
"""
from .features import ITERVAR_LENGTH, FeatureError, itervar_features, knob_features, program_features
from .ga_tuner import GATuner
from .grid_tuner import GridSearchTuner
from .random_tuner import RandomTuner
from .sa import SimulatedAnnealing
from .tuner import Tuner, TunerError
from .xgb_tuner import XGBTuner

__all__ = ["Tuner", "TunerError", "RandomTuner", "GridSearchTuner", "GATuner", "XGBTuner",
           "SimulatedAnnealing", "itervar_features", "knob_features", "program_features",
           "FeatureError", "ITERVAR_LENGTH"]
