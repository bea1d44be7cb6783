package testkit

// SMTPServer is a scripted SMTP server on loopback: it answers the banner,
// EHLO/HELO, STARTTLS, MAIL and RCPT as its SMTPOptions say, and records what
// it was sent.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SMTPOptions script a server. The zero value is a well-behaved server that
// accepts every recipient.
type SMTPOptions struct {
	// IP to listen on; default 127.0.0.1 (on Linux all of 127.0.0.0/8
	// works, so several servers can share a port on different IPs).
	IP string
	// Port to listen on; 0 picks a free one.
	Port int
	// Banner is the greeting; default "220 mx.test ESMTP".
	Banner string
	// Delay is waited before every reply, the banner included.
	Delay time.Duration
	// StartTLS offers STARTTLS with a self-signed certificate.
	StartTLS bool
	// BreakTLS answers STARTTLS with 220 and then sends garbage instead
	// of a TLS handshake, like MTAs with broken TLS stacks.
	BreakTLS bool
	// SMTPUTF8 offers the SMTPUTF8 extension.
	SMTPUTF8 bool
	// EHLOReply replaces the EHLO reply, e.g. "502 5.5.1 no" to force the
	// client to HELO.
	EHLOReply string
	// MailReply replaces the MAIL reply (default "250 2.1.0 Ok").
	MailReply string
	// Rcpt returns the reply to RCPT TO:<addr>; lines are separated by
	// "\n" or "\r\n". Default "250 2.1.5 OK".
	Rcpt func(addr string) string
	// RcptFrom, when set, replaces Rcpt with a reply that may depend on
	// the client's IP address too (a server that refuses one sender
	// address, listed on its DNS blocklist, and not another).
	RcptFrom func(client, addr string) string
	// Silent accepts connections but never sends anything.
	Silent bool
}

// SMTPServer is a running scripted SMTP server.
type SMTPServer struct {
	// Addr is "ip:port", Host the IP and Port the port it listens on.
	Addr string
	Host string
	Port int

	opts SMTPOptions
	ln   net.Listener
	done chan struct{}
	wg   sync.WaitGroup

	mu          sync.Mutex
	conns       map[net.Conn]struct{}
	connections int
	active      int
	maxActive   int
	commands    []string
	tlsCommands []string
	clients     []string
}

// StartSMTP starts a server and stops it when the test ends. It fails the test
// when it cannot listen.
func StartSMTP(t testing.TB, opts SMTPOptions) *SMTPServer {
	t.Helper()
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	if opts.Banner == "" {
		opts.Banner = "220 mx.test ESMTP"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.IP, strconv.Itoa(opts.Port)))
	if err != nil {
		t.Fatalf("testkit: SMTP server: cannot listen on %s port %d (loopback addresses other than 127.0.0.1 need Linux): %v", opts.IP, opts.Port, err)
	}
	if opts.StartTLS {
		if _, err := certificate(); err != nil {
			ln.Close()
			t.Fatalf("testkit: SMTP server: self-signed certificate: %v", err)
		}
	}
	s := &SMTPServer{
		Addr: ln.Addr().String(), Host: opts.IP, Port: ln.Addr().(*net.TCPAddr).Port,
		opts: opts, ln: ln, done: make(chan struct{}), conns: make(map[net.Conn]struct{}),
	}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.stop)
	return s
}

func (s *SMTPServer) stop() {
	close(s.done)
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Connections returns how many connections the server accepted.
func (s *SMTPServer) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connections
}

// Clients returns the remote IP address of every connection accepted, in
// order: a test tells connections made through a proxy from direct ones
// by it.
func (s *SMTPServer) Clients() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.clients...)
}

// Active returns how many sessions are open now (see MaxConcurrent).
func (s *SMTPServer) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// MaxConcurrent returns the most sessions that were open at once. A
// session ends when the client says QUIT or the connection closes.
func (s *SMTPServer) MaxConcurrent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxActive
}

// Commands returns every command line received, in order, over all
// connections.
func (s *SMTPServer) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

// TLSCommands returns the command lines received inside TLS sessions.
func (s *SMTPServer) TLSCommands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tlsCommands...)
}

func (s *SMTPServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		select {
		case <-s.done:
			s.mu.Unlock()
			c.Close()
			return
		default:
		}
		s.conns[c] = struct{}{}
		s.connections++
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		s.clients = append(s.clients, host)
		s.active++
		s.maxActive = max(s.maxActive, s.active)
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// session is one client connection.
type session struct {
	s     *SMTPServer
	nc    net.Conn
	tp    *textproto.Conn
	tls   bool
	mail  bool
	ended bool
}

// end marks the session over for MaxConcurrent. It runs at QUIT, before
// the reply, so a client that waits for the reply and then opens a new
// connection is never counted twice.
func (c *session) end() {
	if c.ended {
		return
	}
	c.ended = true
	c.s.mu.Lock()
	c.s.active--
	c.s.mu.Unlock()
}

func (s *SMTPServer) serve(nc net.Conn) {
	c := &session{s: s, nc: nc, tp: textproto.NewConn(nc)}
	defer func() {
		c.end()
		nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		s.wg.Done()
	}()
	if s.opts.Silent {
		io.Copy(io.Discard, nc)
		return
	}
	if !c.reply(s.opts.Banner) {
		return
	}
	greeted := strings.HasPrefix(s.opts.Banner, "2")
	for {
		line, err := c.tp.ReadLine()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.commands = append(s.commands, line)
		if c.tls {
			s.tlsCommands = append(s.tlsCommands, line)
		}
		s.mu.Unlock()
		verb, arg, _ := strings.Cut(line, " ")
		verb = strings.ToUpper(verb)
		if verb == "QUIT" {
			c.end()
			c.reply("221 2.0.0 Bye")
			return
		}
		if !greeted {
			// RFC 5321 4.3.2: after a refusing banner only QUIT is valid.
			if !c.reply("503 5.5.1 No service, only QUIT") {
				return
			}
			continue
		}
		if !c.command(verb, arg) {
			return
		}
	}
}

// command answers one command; false ends the connection.
func (c *session) command(verb, arg string) bool {
	o := c.s.opts
	switch verb {
	case "EHLO":
		c.mail = false
		if o.EHLOReply != "" {
			return c.reply(o.EHLOReply)
		}
		lines := []string{"250-mx.test greets " + arg, "250-PIPELINING", "250-SIZE 10240000", "250-ENHANCEDSTATUSCODES"}
		if (o.StartTLS || o.BreakTLS) && !c.tls {
			lines = append(lines, "250-STARTTLS")
		}
		if o.SMTPUTF8 {
			lines = append(lines, "250-SMTPUTF8")
		}
		lines = append(lines, "250 8BITMIME")
		return c.reply(strings.Join(lines, "\n"))
	case "HELO":
		c.mail = false
		return c.reply("250 mx.test")
	case "STARTTLS":
		if !(o.StartTLS || o.BreakTLS) || c.tls {
			return c.reply("502 5.5.1 STARTTLS not offered")
		}
		if !c.reply("220 2.0.0 Ready to start TLS") {
			return false
		}
		if o.BreakTLS {
			c.reply("this is not a TLS server hello")
			return false
		}
		cert, _ := certificate()
		tc := tls.Server(c.nc, &tls.Config{Certificates: []tls.Certificate{cert}})
		if err := tc.Handshake(); err != nil {
			return false
		}
		c.tp = textproto.NewConn(tc)
		c.tls, c.mail = true, false
		return true
	case "MAIL":
		r := "250 2.1.0 Ok"
		if o.MailReply != "" {
			r = o.MailReply
		}
		c.mail = strings.HasPrefix(r, "2")
		return c.reply(r)
	case "RCPT":
		if !c.mail {
			return c.reply("503 5.5.1 Error: need MAIL command")
		}
		if o.RcptFrom != nil {
			client, _, _ := net.SplitHostPort(c.nc.RemoteAddr().String())
			return c.reply(o.RcptFrom(client, rcptAddr(arg)))
		}
		if o.Rcpt == nil {
			return c.reply("250 2.1.5 OK")
		}
		return c.reply(o.Rcpt(rcptAddr(arg)))
	case "RSET":
		c.mail = false
		return c.reply("250 2.0.0 Ok")
	case "NOOP":
		return c.reply("250 2.0.0 Ok")
	case "DATA":
		return c.reply("554 5.5.1 smtptest: DATA is not for probers")
	default:
		return c.reply("500 5.5.2 Error: command not recognized")
	}
}

// rcptAddr extracts the address of "TO:<addr> params".
func rcptAddr(arg string) string {
	if len(arg) >= 3 && strings.EqualFold(arg[:3], "TO:") {
		arg = strings.TrimSpace(arg[3:])
	}
	if strings.HasPrefix(arg, "<") {
		if i := strings.IndexByte(arg, '>'); i > 0 {
			return arg[1:i]
		}
	}
	addr, _, _ := strings.Cut(arg, " ")
	return addr
}

// reply waits the configured delay and writes text, one CRLF-terminated
// line per line of text; false when the server stops or the write fails.
func (c *session) reply(text string) bool {
	if d := c.s.opts.Delay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.s.done:
			t.Stop()
			return false
		}
	}
	w := c.tp.W
	for _, l := range strings.Split(strings.TrimRight(text, "\r\n"), "\n") {
		w.WriteString(strings.TrimRight(l, "\r"))
		w.WriteString("\r\n")
	}
	return w.Flush() == nil
}

var certificate = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "mx.test"},
		DNSNames:     []string{"mx.test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
})
