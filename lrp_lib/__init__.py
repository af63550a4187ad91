__version__ = '0.1.0'
from .mode import relevance, is_relevance_mode
