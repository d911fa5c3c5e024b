"""The api's HTTP bodies per resource (msgspec Structs): request bodies, answers and event
data the route modules send, beside the library's read models they wrap."""
