"""The platform: everything that does I/O for the domain (bus, storage, runtime, settings,
logging, subjects, messages, state records, keys). Imports the domain, never programs or services."""
