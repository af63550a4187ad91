"""Data sets used by the book: real ones read from a local root (or downloaded), and generated ones.

Each loader lives in its own module and is re-exported here.
"""

from lrp_lib.book.datasets.infection import infection
from lrp_lib.book.datasets.mutagenicity import mutagenicity
from lrp_lib.book.datasets.esol import esol
from lrp_lib.book.datasets.houses import ba_houses
