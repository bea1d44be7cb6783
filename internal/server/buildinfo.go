package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/evs-dev/evs/internal/config"
)

// BuildInfo exports evs_build_info{version,revision,goversion} 1, which
// says which build answers: a dashboard can join it to the other series
// to see when an upgrade changed them.
func (m *Prometheus) BuildInfo(in config.BuildInfo) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "evs_build_info",
		Help: "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "revision": in.RevisionLabel(), "goversion": in.GoVersion,
		},
	}, func() float64 { return 1 }))
}
