"""The limits of a trace upload, said once for the api, the storage layer and the client: S3's own
multipart rules and what one uploads request of the api hands out. A module of constants, so a
client (``cascade import``) reads them without importing the api or an S3 library."""

from __future__ import annotations

MiB = 1024 * 1024
#: S3's lower bound for every multipart part except the last.
MIN_PART_SIZE = 5 * MiB
#: S3's upper bound on the part number of a multipart upload.
MAX_PARTS = 10_000
#: Part URLs one file gets at most: its parts grow (in whole MiB) beyond the threshold's 16 MiB
#: instead (a 64 GiB file in 64 MiB parts).
PART_URLS_PER_FILE = 1024
#: Presigned URLs one uploads request may ask for (a single PUT counts one, a multipart file its
#: parts): each takes a signature, so a request of 20 files of 64 GiB in 16 MiB parts had the api
#: sign 80,000 URLs for 10 s; clients ask in batches (``services.api.uploads.upload_urls`` tells how
#: many a file needs; ``programs.client`` batches by it).
MAX_UPLOAD_URLS = 4096
assert PART_URLS_PER_FILE <= MAX_PARTS and PART_URLS_PER_FILE <= MAX_UPLOAD_URLS
