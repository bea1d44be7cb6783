package webhook

import (
	"encoding/json"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// Event types, one per final state.
const (
	TypeCompleted = "batch.completed"
	TypeCancelled = "batch.cancelled"
	TypeFailed    = "batch.failed"
)

// timeLayout is the contract's timestamp form (section 1), as api.Time.
const timeLayout = "2006-01-02T15:04:05.000Z"

type wireTime time.Time

func (t wireTime) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Time(t).UTC().Format(timeLayout))
}

type eventRequest struct {
	ID          string    `json:"id"`
	Mode        evs.Mode  `json:"mode"`
	State       evs.State `json:"state"`
	Error       string    `json:"error,omitempty"`
	CreatedAt   wireTime  `json:"createdAt"`
	CompletedAt wireTime  `json:"completedAt"`
}

type eventCounters struct {
	Total         int `json:"total"`
	Duplicates    int `json:"duplicates"`
	Processed     int `json:"processed"`
	Deliverable   int `json:"deliverable"`
	Undeliverable int `json:"undeliverable"`
	Risky         int `json:"risky"`
	Unknown       int `json:"unknown"`
}

type event struct {
	Type      string   `json:"type"`
	Timestamp wireTime `json:"timestamp"`
	Data      struct {
		Request  eventRequest  `json:"request"`
		Counters eventCounters `json:"counters"`
	} `json:"data"`
}

// EventType is the event type of a final state.
func EventType(s evs.State) string {
	switch s {
	case evs.StateCancelled:
		return TypeCancelled
	case evs.StateFailed:
		return TypeFailed
	}
	return TypeCompleted
}

// Body is the event of final batch b. Its timestamp is the moment b became
// final, so every retry sends the same bytes (only the webhook-timestamp
// header changes).
func Body(b evs.Batch) []byte {
	var e event
	e.Type = EventType(b.State)
	e.Timestamp = wireTime(b.CompletedAt)
	e.Data.Request = eventRequest{
		ID: b.ID, Mode: b.Mode, State: b.State, Error: b.Error,
		CreatedAt: wireTime(b.CreatedAt), CompletedAt: wireTime(b.CompletedAt),
	}
	e.Data.Counters = eventCounters(b.Counters)
	out, _ := json.Marshal(e) // plain structs: cannot fail
	return out
}
