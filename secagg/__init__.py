"""Sans-IO secure aggregation (SecAgg, Bonawitz et al. CCS 2017; SecAgg+, Bell et al. CCS 2020)."""
