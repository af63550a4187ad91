"""Data sets used by the book: real ones read from a local root (or downloaded), and generated ones.

Each loader lives in its own module and is re-exported here.
"""

from .infection import infection
from .mutagenicity import mutagenicity
from .esol import esol
