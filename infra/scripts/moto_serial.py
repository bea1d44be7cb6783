"""moto_server, with DynamoDB requests served one at a time.

moto answers requests on threads, and a DynamoDB conditional write checks
its condition and then writes without a lock: two concurrent claims of one
key can both succeed, which DynamoDB never allows. The store contract's
concurrency tests (one claim of many wins, a counter never passes its
limit) then fail now and then on a loaded machine through no fault of the
code under test. This serves moto's own application with one lock around
DynamoDB requests, so each is atomic as it is on AWS; SQS (whose receives
wait for messages) and the rest are not serialized.

Usage: python3 moto_serial.py HOST PORT
"""

import os
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

_lock = threading.Lock()
_app = DomainDispatcherApplication(create_backend_app)


def _serial(environ, start_response):
    if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
        with _lock:
            # The whole reply is made inside the lock: the write happens
            # while the body is produced.
            return list(_app(environ, start_response))
    return _app(environ, start_response)


if __name__ == "__main__":
    # moto_server sets it too: some replies name the server's own port.
    os.environ.setdefault("MOTO_PORT", sys.argv[2])
    run_simple(sys.argv[1], int(sys.argv[2]), _serial, threaded=True)
