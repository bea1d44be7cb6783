# evs — the two commands that matter: `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
GOBIN := $(shell $(GO) env GOPATH 2>/dev/null)/bin
STATICCHECK := $(GOBIN)/staticcheck
FUNCTIONS := verify requests authorizer worker
PKGS := ./...
MODULE := github.com/evs-dev/evs
# End-to-end packages: the whole service over HTTP, Lambda and the CLI, and
# the SQLite store's durability tests (child processes killed mid-write).
# Longest first: go test starts them in about this order.
END_TO_END := internal/app internal/server infra/evs internal/store internal/api internal/sqlitestore
# Packages with no concurrency of their own (the Go client, the verify
# function's main, the address parser) run with the end-to-end ones: the
# race detector would only make them slower.
NO_RACE := client functions/verify internal/verify/address
# The race run's longest packages first, the rest as go list gives them:
# started last, one of them would run alone at the end.
RACE_FIRST := internal/dynamostore internal/batch internal/verify/smtpprobe internal/idempotency
RACE_PKGS = $(addprefix $(MODULE)/,$(RACE_FIRST)) $(filter-out $(addprefix $(MODULE)/,$(END_TO_END) $(NO_RACE) $(RACE_FIRST)),$(shell $(GO) list $(PKGS)))
# One run after the other, each to its end, so one report shows all.
# -parallel 6: the end-to-end tests' parallel ones mostly wait on peers,
# moto and timers. Run at once, the race run (ten times the CPU) starved
# the end-to-end tests' timers on two cores: a different test timed out in
# half of the runs; at the lowest priority beside them, its own timed tests
# starved instead. It is compiled beside them at the lowest priority (its
# binaries are not run: -exec true), in the CPU they leave idle, and runs
# after them. The race run has moto servers of its own; -parallel 4: its
# longest packages' tests (DynamoDB on moto, the batch worker's timers)
# mostly wait too, and run at once but for those whose subject is timing.
# The large provider's whole lane (400,000 addresses on a simulated clock)
# takes 5 s, and minutes under the race detector, where only a tenth runs:
# it runs whole once more without it, beside the race run's start, its
# report after it.
TEST_BOTH = bash -c 'rc=0; nice -n 19 $(GO) test -race -count=1 -run "^$$" -exec true $(RACE_PKGS) >/dev/null 2>&1 & pc=$$!; \
	$(GO) test -count=1 -parallel 6 -timeout 30m $(addprefix ./,$(END_TO_END) $(NO_RACE)) || rc=1; wait $$pc; \
	lane=$$(mktemp); $(GO) test -count=1 -run TestLaneSpendsTheBudget ./internal/batch >$$lane 2>&1 & \
	./infra/scripts/with-moto.sh $(GO) test -race -count=1 -parallel 4 -timeout 30m $(RACE_PKGS) || rc=1; \
	wait $$! || rc=1; cat $$lane; rm -f $$lane; exit $$rc'

.PHONY: run test checks unit race ts-check ts-types oapi-check lint vet fmt-check staticcheck cfn-lint bench bench-http fuzz build deploy sam-local clean check-go dante mta chromium

check-go:
	@command -v $(GO) >/dev/null 2>&1 || { echo "make: Go is required (1.26 or newer): see https://go.dev/doc/install" >&2; exit 1; }
	@$(GO) version | awk '{split($$3,v,"."); if (v[1]"."v[2] < "go1.26") { print "make: Go 1.26 or newer is required, found " $$3 > "/dev/stderr"; exit 1 }}'

## run: start the whole API locally (first start: a test-mode account, its key and a curl example)
run: check-go
	@echo "make run: building bin/evs; the first build compiles every dependency (a few minutes on 2 cores; each package is named as it compiles), later builds take seconds"
	@$(GO) build -v -o bin/evs ./infra/evs
	./bin/evs serve --test-account

## test: vet, lint the SAM template, and run every test (DynamoDB/SQS tests
## against moto_server, SMTP-through-SOCKS5 tests through danted, the
## verdicts through a real Postfix and postgrey, the console in a headless
## Chromium)
##
## The race detector instruments the packages whose tests drive concurrency
## at its source (engine, gate, queues, caches, idempotency, adapters). The
## end-to-end packages below run once without it: under -race they cost 11x
## the CPU (internal/server: 382 s against 34 s), their memory and at-scale
## tests measure what the instrumentation distorts, and the concurrent code
## they exercise is the instrumented packages'. `make race` runs everything
## under the race detector.
# The checks run beside the tests, at a lower priority (nice 10): they take
# a minute of CPU that the tests' waits leave idle; their report comes last.
test: check-go dante mta chromium
	@chk=$$(mktemp); nice -n 10 $(MAKE) --no-print-directory checks >$$chk 2>&1 & cp=$$!; \
	./infra/scripts/with-moto.sh ./infra/scripts/with-socks5.sh $(TEST_BOTH); rc=$$?; \
	wait $$cp || rc=1; cat $$chk; rm -f $$chk; exit $$rc

# checks: the checks of make test, all at once (-O keeps each one's output
# together): go vet compiles on both cores while cfn-lint, npm, tsc and
# oapi-codegen mostly keep one busy or wait.
checks: check-go
	@$(MAKE) --no-print-directory -j -O fmt-check vet cfn-lint ts-check oapi-check

## unit: the tests alone, without the template lint
unit: check-go dante mta chromium
	./infra/scripts/with-moto.sh ./infra/scripts/with-socks5.sh $(TEST_BOTH)

## race: every package's tests under the race detector (slow: 25+ min on 2 cores)
race: check-go dante mta chromium
	./infra/scripts/with-moto.sh ./infra/scripts/with-socks5.sh $(GO) test -race -count=1 -timeout 60m $(PKGS)

## ts-check: the TypeScript types of the API (api/typescript/evs.d.ts,
## generated from api/openapi.yaml by openapi-typescript) are current and,
## with a typed example of their use, pass tsc --strict
ts-check: ts-deps
	@echo "ts-check: api/typescript/evs.d.ts against api/openapi.yaml, then tsc --strict"
	@cd api/typescript && { npx --no-install openapi-typescript ../openapi.yaml -o .evs.d.ts.new >/dev/null 2>&1 \
	  || { echo "make: openapi-typescript could not read api/openapi.yaml" >&2; exit 1; }; }
	@cd api/typescript && { cmp -s evs.d.ts .evs.d.ts.new || { rm -f .evs.d.ts.new; echo "make: api/typescript/evs.d.ts is stale: run make ts-types" >&2; exit 1; }; }
	@cd api/typescript && rm -f .evs.d.ts.new && npx --no-install tsc -p tsconfig.json

## ts-types: regenerate api/typescript/evs.d.ts from api/openapi.yaml
ts-types: ts-deps
	cd api/typescript && npx --no-install openapi-typescript ../openapi.yaml -o evs.d.ts

## oapi-check: a Go client generated from api/openapi.yaml by oapi-codegen
## (default settings; pinned in api/oapi-codegen/go.mod, a module of its own
## so its dependencies stay out of ours) builds and talks to a real evs serve
oapi-check: check-go
	@echo "oapi-check: generate api/oapi-codegen/evsapi with oapi-codegen, then a round trip against evs serve"
	@cd api/oapi-codegen && $(GO) tool oapi-codegen -package evsapi -o evsapi/evs.gen.go ../openapi.yaml \
	  || { echo "make: oapi-codegen could not generate a client from api/openapi.yaml" >&2; exit 1; }
	@cd api/oapi-codegen && $(GO) vet ./... && $(GO) test -count=1 ./...

# ts-deps: openapi-typescript and tsc, at the versions of package-lock.json.
ts-deps:
	@command -v npm >/dev/null 2>&1 || { echo "make: the TypeScript check needs Node.js and npm: apt-get install -y nodejs npm" >&2; exit 1; }
	@[ -x api/typescript/node_modules/.bin/tsc ] || (cd api/typescript && npm ci --no-audit --no-fund >/dev/null) || { echo "make: npm ci failed in api/typescript" >&2; exit 1; }

# dante: the SOCKS5 server of the tests (Debian package dante-server), installed
# when missing; apt-get update only when the plain install fails.
dante:
	@command -v danted >/dev/null 2>&1 || [ -x /usr/sbin/danted ] || { \
	  command -v apt-get >/dev/null 2>&1 || { echo "make: the tests need danted (Dante's SOCKS5 server) and apt-get is not here to install it: install Dante's server yourself" >&2; exit 1; }; \
	  [ "$$(id -u)" = 0 ] || { echo "make: the tests need danted: run as root, or first: sudo apt-get install -y dante-server" >&2; exit 1; }; \
	  echo "make: installing dante-server (the SOCKS5 server of the tests)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq dante-server >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq dante-server >/dev/null; } || { echo "make: apt-get could not install dante-server" >&2; exit 1; }; \
	}

# chromium: the headless browser that drives the web console's test
# (internal/api/console*.go, docs/console.md; Debian package chromium), installed
# when missing; apt-get update only when the plain install fails.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 || { echo "make: the tests need Chromium (the console's browser test) and apt-get is not here to install it: install chromium yourself" >&2; exit 1; }; \
	  [ "$$(id -u)" = 0 ] || { echo "make: the tests need Chromium: run as root, or first: sudo apt-get install -y chromium" >&2; exit 1; }; \
	  echo "make: installing chromium (the headless browser of the console's test)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; } || { echo "make: apt-get could not install chromium" >&2; exit 1; }; \
	}

# mta: a real Postfix and postgrey as loopback peers of the tests (Debian
# packages postfix and postgrey; internal/testkit/postfix.go starts private
# instances of them). Installed when missing, without configuring or
# starting a system-wide Postfix on port 25 or a postgrey: debconf is told
# "No configuration", and a policy-rc.d that exits 101 keeps the packages'
# services from starting during the install; it is removed afterwards.
# apt-get update only when the plain install fails.
# Exim 4 and OpenSMTPD are peers too, but installing either would remove
# Postfix (they all conflict on mail-transport-agent): infra/scripts/
# fetch-mta.sh downloads their packages and unpacks them, without
# installing, into EVS_MTA_ROOT, where internal/testkit looks for them (the
# same default: not exported, so that evs serve under make run never sees
# it), and makes their system users as the packages would.
EVS_MTA_ROOT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/evs/mta/root
mta:
	@if [ -x /usr/lib/postfix/sbin/master ] && [ -x /usr/sbin/postgrey ]; then exit 0; fi; \
	  command -v apt-get >/dev/null 2>&1 || { echo "make: the tests need Postfix and postgrey and apt-get is not here to install them: install the postfix and postgrey packages yourself" >&2; exit 1; }; \
	  [ "$$(id -u)" = 0 ] || { echo "make: the tests need Postfix and postgrey: run as root, or first: sudo apt-get install -y postfix postgrey" >&2; exit 1; }; \
	  echo "make: installing postfix and postgrey (the real MTA peers of the tests; no system-wide service is configured or started)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections || { echo "make: debconf-set-selections failed: cannot keep the postfix package from configuring itself" >&2; exit 1; }; \
	  rcd=/usr/sbin/policy-rc.d; had=; [ -e $$rcd ] && { had=1; cp -p $$rcd $$rcd.evs-saved; }; \
	  printf '#!/bin/sh\nexit 101\n' >$$rcd && chmod 755 $$rcd; \
	  ok=1; apt-get install -y -qq postfix postgrey >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq postfix postgrey >/dev/null; } || ok=; \
	  if [ -n "$$had" ]; then mv -f $$rcd.evs-saved $$rcd; else rm -f $$rcd; fi; \
	  [ -n "$$ok" ] || { echo "make: apt-get could not install postfix and postgrey" >&2; exit 1; }
	@./infra/scripts/fetch-mta.sh "$(EVS_MTA_ROOT)"

vet: check-go
	$(GO) vet $(PKGS)

fmt-check: check-go
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2 || { echo "make: could not install staticcheck (needs the Go module proxy)" >&2; exit 1; }

staticcheck: $(STATICCHECK)
	$(STATICCHECK) $(PKGS)

## lint: gofmt, go vet and staticcheck
lint: fmt-check vet staticcheck

cfn-lint:
	@command -v cfn-lint >/dev/null 2>&1 || { echo "make: cfn-lint not found: install it with: pip install cfn-lint" >&2; exit 1; }
	cfn-lint template.yaml

## bench: the performance figures quoted in the README
bench: check-go
	./infra/scripts/with-moto.sh $(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m $(PKGS)

## bench-http: the HTTP path of `evs serve` against a bare net/http floor, in one run (ratios; BENCH_HTTP_FLAGS adds flags, e.g. -duration 10s)
bench-http: check-go
	$(GO) run ./infra/loadtest $(BENCH_HTTP_FLAGS)

## fuzz: run every fuzz target in the tree for FUZZTIME each (default 1m)
FUZZTIME ?= 1m
fuzz: check-go
	@for d in $$(grep -rl --include='*_test.go' '^func Fuzz' internal infra functions | xargs -n1 dirname | sort -u); do \
		for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$d/*_test.go | sed 's/^func //'); do \
			echo "fuzz $$t ./$$d ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./$$d/ || exit 1; \
		done; \
	done

## build: every Lambda's bootstrap zip for arm64, with sizes
build: check-go
	@mkdir -p dist
	@for f in $(FUNCTIONS); do \
	  rm -rf dist/$$f && mkdir -p dist/$$f && \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags=-s -o dist/$$f/bootstrap ./functions/$$f && \
	  (cd dist/$$f && rm -f ../$$f.zip && python3 -c "import zipfile,os; z=zipfile.ZipFile('../$$f.zip','w',zipfile.ZIP_DEFLATED); i=zipfile.ZipInfo('bootstrap'); i.external_attr=0o755<<16; i.compress_type=zipfile.ZIP_DEFLATED; z.writestr(i, open('bootstrap','rb').read()); z.close()") && \
	  printf '%-12s %s bytes\n' $$f $$(stat -c %s dist/$$f.zip) || exit 1; \
	done

## sam-local: the API under `sam local start-api` (Docker) against moto_server:
## tables, queue and an API key made first (infra/scripts/sam-local.sh)
sam-local: check-go
	@GO=$(GO) ./infra/scripts/sam-local.sh

## deploy: build with SAM and deploy (needs the AWS SAM CLI and credentials)
deploy:
	@command -v sam >/dev/null 2>&1 || { echo "make: the AWS SAM CLI is required: see https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/install-sam-cli.html" >&2; exit 1; }
	@echo "make: alarms reach nobody unless you answer AlarmEmail (an address to subscribe) or AlarmTopicArn (a topic of yours); see docs/aws.md" >&2
	sam build && sam deploy --guided

# Used by `sam build` (BuildMethod: makefile): one target per function.
build-VerifyFunction build-RequestsFunction build-AuthorizerFunction build-WorkerFunction:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags=-s -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(shell echo $(subst build-,,$(subst Function,,$@)) | tr A-Z a-z)

clean:
	rm -rf dist .aws-sam
