"""brokerchaos: chaos tests for message brokers, analysed on Spark."""

__version__ = "0.1.0"
