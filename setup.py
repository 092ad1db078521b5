# All metadata lives in setup.cfg; this file only lets older tools and `pip install -e .` find it.
from setuptools import setup

setup()
