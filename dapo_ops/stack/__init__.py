"""The locked Python stack of the nodes (stack/lock/): parsing, checking and regenerating the lock."""
