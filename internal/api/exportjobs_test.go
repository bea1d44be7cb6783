package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// jobStore is an api.ExportJobStore in memory: one job record, and what
// was asked of it.
type jobStore struct {
	mu       sync.Mutex
	job      *store.ExportJob
	starts   []string // the replace token of each start
	filters  []string // the filters of each start
	dropped  int
	startErr error
}

func (s *jobStore) ExportJob(_ context.Context, _, _, _ string) (store.ExportJob, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.job == nil {
		return store.ExportJob{}, false, nil
	}
	return *s.job, true, nil
}

func (s *jobStore) StartExport(_ context.Context, j store.ExportJob, replace string, deadline time.Time, _ int) (store.ExportJob, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.startErr != nil {
		return store.ExportJob{}, false, s.startErr
	}
	s.starts = append(s.starts, replace)
	s.filters = append(s.filters, j.Filters)
	j.Token, j.State, j.Deadline = "new", store.ExportRunning, deadline
	s.job = &j
	return j, true, nil
}

func (s *jobStore) DropExport(_ context.Context, _ store.ExportJob) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped++
	s.job = nil
	return nil
}

// TestExportJobRule: what each route answers for each state of its
// export job, with the store and the queue in memory: the rule of
// exportjobs.go, case by case.
func TestExportJobRule(t *testing.T) {
	const url = "https://bucket.example/exports/x.csv?X-Amz-Signature=s"
	limited := &store.LimitError{Err: evs.Errorf(evs.CodeRateLimited, "The account has 4 exports running."), Retry: 7 * time.Second}
	for _, tc := range []struct {
		name     string
		route    string // "results" (text/csv) or "export"
		reply    int    // MaxCSVReply
		job      *store.ExportJob
		age      time.Duration // the clock moved on after the job's times
		queueErr error
		startErr error

		status       int
		retryAfter   string
		started      []string // replace tokens of the starts
		queued, drop int
	}{
		{name: "no job, list fits", route: "results", reply: 4 << 20, status: 200},
		{name: "no job, list too long", route: "results", reply: 10, status: 202, retryAfter: "2", started: []string{""}, queued: 1},
		{name: "no job, export link", route: "export", reply: 4 << 20, status: 202, retryAfter: "2", started: []string{""}, queued: 1},
		{name: "running", route: "export", job: &store.ExportJob{Token: "t1", State: store.ExportRunning}, age: time.Minute,
			status: 202, retryAfter: "2"},
		{name: "running past its deadline", route: "export", job: &store.ExportJob{Token: "t1", State: store.ExportRunning}, age: 16 * time.Minute,
			status: 202, retryAfter: "2", started: []string{"t1"}, queued: 1},
		{name: "done", route: "results", reply: 10, job: &store.ExportJob{Token: "t1", State: store.ExportDone, Version: "queued/0", URL: url},
			age: 30 * time.Minute, status: 303},
		{name: "done, export link", route: "export", job: &store.ExportJob{Token: "t1", State: store.ExportDone, Version: "queued/0", URL: url},
			status: 200},
		{name: "done for an older batch, just now", route: "export", job: &store.ExportJob{Token: "t1", State: store.ExportDone, Version: "running/5", URL: url},
			age: 30 * time.Second, status: 200},
		{name: "done for an older batch, long ago", route: "export", job: &store.ExportJob{Token: "t1", State: store.ExportDone, Version: "running/5", URL: url},
			age: 2 * time.Minute, status: 202, retryAfter: "2", started: []string{"t1"}, queued: 1},
		{name: "failed", route: "export", job: &store.ExportJob{Token: "t1", State: store.ExportFailed}, status: 503, retryAfter: "1", drop: 1},
		{name: "queue down", route: "export", queueErr: errors.New("sqs: down"), status: 503, started: []string{""}, drop: 1},
		{name: "over the cap", route: "export", startErr: limited, status: 429, retryAfter: "7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := &jobStore{startErr: tc.startErr}
			queued := 0
			f := newFixtureWith(t, func(d *api.Deps) {
				d.MaxCSVReply = tc.reply
				d.ExportJobs = &api.ExportJobs{Store: jobs, Queue: func(_ context.Context, j store.ExportJob) error {
					if tc.queueErr != nil {
						return tc.queueErr
					}
					queued++
					return nil
				}}
			})
			ctx := context.Background()
			create := f.event("acct-1", http.MethodPost, "/v1/requests", nil, `{"emails":["a@x.example","b@y.example"]}`, nil)
			r, _ := f.fn(ctx, create)
			var env envelope
			decode(t, create, r, &env)
			if tc.job != nil {
				j := *tc.job
				j.Deadline, j.DoneAt = f.clock.Now().Add(15*time.Minute), f.clock.Now()
				jobs.job = &j
			}
			f.clock.Advance(tc.age)
			resource, headers := "/v1/requests/{id}/export", map[string]string(nil)
			if tc.route == "results" {
				resource, headers = "/v1/requests/{id}/results", map[string]string{"Accept": "text/csv"}
			}
			get := f.event("acct-1", http.MethodGet, resource, map[string]string{"id": env.Request.ID}, "", headers)
			get.QueryStringParameters = map[string]string{"status": "risky,deliverable", "minScore": "05"}
			r, _ = f.fn(ctx, get)
			if r.StatusCode != tc.status || r.Headers["Retry-After"] != tc.retryAfter {
				t.Fatalf("%d, Retry-After %q: %s; want %d, %q", r.StatusCode, r.Headers["Retry-After"], r.Body, tc.status, tc.retryAfter)
			}
			switch r.StatusCode {
			case 200, 303:
				if tc.job != nil && (r.StatusCode == 303 && r.Headers["Location"] != url || !strings.Contains(r.Body, `"url":"`+url+`"`)) {
					t.Errorf("reply %v %s, want the job's URL", r.Headers, r.Body)
				}
			case 202:
				var body struct{ State string }
				decode(t, get, r, &body)
				if body.State != "running" {
					t.Errorf("202 body %s", r.Body)
				}
			default:
				var e errorBody
				decode(t, get, r, &e)
				if strings.Contains(r.Body, "sqs") {
					t.Errorf("the reply leaks the cause: %s", r.Body)
				}
			}
			if len(jobs.starts) != len(tc.started) || len(tc.started) > 0 && jobs.starts[0] != tc.started[0] || queued != tc.queued || jobs.dropped != tc.drop {
				t.Errorf("starts %q, queued %d, dropped %d; want %q, %d, %d", jobs.starts, queued, jobs.dropped, tc.started, tc.queued, tc.drop)
			}
			for _, fl := range jobs.filters {
				if fl != "minScore=5&status=deliverable%2Crisky" {
					t.Errorf("filters %q, want the canonical query", fl)
				}
			}
		})
	}
}
