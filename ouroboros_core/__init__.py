"""Ouroboros speculative decoding on stock transformers models: one engine, three methods, typed
events."""

from .config import METHODS, ConfigError, OuroborosConfig, SamplingConfig, SpeculativeConfig
from .engine import Engine
from .events import DoneEvent, Result, Source, Stats, StepEvent, Token
from .models import LoadError, load_engine
from .phrases import PhrasePool
from .verdict import OutputVerdict

__all__ = [
    "METHODS",
    "ConfigError",
    "DoneEvent",
    "Engine",
    "LoadError",
    "OuroborosConfig",
    "OutputVerdict",
    "PhrasePool",
    "Result",
    "SamplingConfig",
    "Source",
    "SpeculativeConfig",
    "Stats",
    "StepEvent",
    "Token",
    "load_engine",
]
