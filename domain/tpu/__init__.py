"""The TPU catalog (generations, slice shapes, prices, zones, the workers' flags) and how TPU capacity is obtained."""
