package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/server"
)

// serveTLS loads the certificate of EVS_TLS_CERT and EVS_TLS_KEY (nil
// when they are not set) and reloads it on every SIGHUP until ctx ends;
// stop ends the reloading. A certificate that cannot be loaded stops the
// start with one line naming the files.
func serveTLS(ctx context.Context, cfg config.Config, logger *slog.Logger) (cert *server.Certificate, stop func(), err error) {
	if cfg.TLSCert == "" {
		return nil, func() {}, nil
	}
	if cert, err = server.LoadCertificate(cfg.TLSCert, cfg.TLSKey); err != nil {
		return nil, nil, err
	}
	server.LogCertificate(logger, cert, time.Now())
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	go cert.ReloadOn(ctx, hup, logger)
	return cert, func() { signal.Stop(hup); cancel() }, nil
}
