"""moto_server, with each DynamoDB call run alone.

DynamoDB evaluates a condition expression and applies the write as one
atomic step; moto's threaded server does not (no lock in its DynamoDB
backend), so two concurrent conditional writes can both pass their
condition. The store contract tests that race 25 charges against a quota,
or 20 claims on one Idempotency-Key, then fail for a reason that is moto's,
not ours, more often the busier the machine. Serialising DynamoDB calls
(fast, never long-polling) restores the guarantee the real service gives;
other services (SQS long polls, S3) keep moto's threads.

Usage: python3 moto_serial.py -H HOST -p PORT
"""

import argparse
import threading

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()

    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def serialised(environ, start_response):
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            return app(environ, start_response)
        with lock:
            # The whole reply is made inside the lock: the write happens
            # while the body is produced, not when app returns.
            return list(app(environ, start_response))

    run_simple(args.host, args.port, serialised, threaded=True)


if __name__ == "__main__":
    main()
