"""Benchmarks and studies of cdmpp, apart from the product (``cdmpp bench <name>``).

Each module measures something about the product and prints or writes figures; none
of them is imported on the collection, training or inference paths.
"""
