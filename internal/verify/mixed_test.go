package verify_test

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/evs-dev/evs/internal/verify"
)

// mixedSize is how many addresses the mixed set holds.
const mixedSize = 1000

// The parts the mixed set draws from. The shares in mixedSet follow what a
// sign-up form or an uploaded list looks like: mostly the big providers and
// company domains, with a tail of typos, throwaway services, broken syntax
// and internationalised text. A benchmark on one address measures one path
// of the quick check; this set measures all of them in realistic proportion.
var (
	mixedProviders = []string{
		"gmail.com", "gmail.com", "gmail.com", "gmail.com", "yahoo.com", "yahoo.com",
		"hotmail.com", "hotmail.com", "outlook.com", "outlook.com", "icloud.com",
		"aol.com", "live.com", "msn.com", "me.com", "gmx.de", "gmx.net", "web.de",
		"mail.ru", "yandex.ru", "qq.com", "163.com", "hotmail.co.uk", "yahoo.co.uk",
		"btinternet.com", "comcast.net", "orange.fr", "free.fr", "libero.it",
		"protonmail.com", "proton.me", "googlemail.com", "t-online.de", "naver.com",
	}
	mixedTypos = []string{
		"gmial.com", "gmal.com", "gmaill.com", "gnail.com", "gmail.con", "gmail.co",
		"gmail.cm", "gmial.con", "hotmial.com", "hotmal.com", "hotmail.con",
		"yahooo.com", "yaho.com", "yahoo.cmo", "outlok.com", "outloo.com",
		"iclod.com", "icoud.com", "protonmial.com", "gooogelmail.com", "hotmial.co.uk",
		"comcast.nte", "verizon.ent", "aol.con", "mgail.com", "yhaoo.com",
	}
	mixedDisposable = []string{
		"mailinator.com", "guerrillamail.com", "10minutemail.com", "yopmail.com",
		"temp-mail.org", "trashmail.com", "sharklasers.com", "maildrop.cc",
		"getnada.com", "dispostable.com", "throwawaymail.com", "mailnesia.com",
		"fakeinbox.com", "x.mailinator.com",
	}
	mixedRoles = []string{
		"info", "support", "admin", "noreply", "no-reply", "sales", "contact",
		"postmaster", "abuse", "webmaster", "hello", "Info", "SUPPORT", "billing+eu",
	}
	mixedFirst = []string{
		"john", "mary", "ahmed", "li", "olga", "pierre", "sofia", "kenji", "anna",
		"carlos", "fatima", "james", "lucas", "emma", "noah", "chloe", "yusuf",
	}
	mixedLast = []string{
		"smith", "mueller", "nguyen", "garcia", "kowalski", "rossi", "tanaka",
		"dubois", "ivanova", "okafor", "johansson", "oconnor", "silva", "chen",
	}
	mixedWords = []string{
		"acme", "northwind", "contoso", "globex", "initech", "umbrella", "stark",
		"wayne", "hooli", "vandelay", "bluth", "dunder", "tyrell", "cyberdyne",
		"soylent", "massive", "pied", "piper", "blue", "river", "harbour", "alpine",
	}
	mixedTLDs = []string{
		"com", "com", "com", "net", "org", "de", "fr", "co.uk", "io", "nl", "it",
		"es", "com.au", "ca", "ch", "se", "pl", "co.jp", "com.br", "example",
	}
	mixedIDN = []string{
		"user@bücher.example", "josé@correo.es", "müller@münchen.de",
		"θεός@παράδειγμα.ελ", "пользователь@пример.рф", "用户@例子.中国",
		"info@xn--bcher-kva.example", "アドレス@例え.jp", "user@straße.de",
		"søren@firma.dk", "ZOË@Zoë.example", "ali@مثال.إختبار",
		"user@xn--80ak6aa92e.com", "françois@société.fr",
	}
	// mixedInvalid covers the rules package address reports, in the forms
	// people and scripts actually produce.
	mixedInvalid = []string{
		"", "   ", "plainaddress", "john.smith", "@gmail.com", "john@", "john@@gmail.com",
		"john smith@gmail.com", "john..smith@gmail.com", ".john@gmail.com",
		"john.@gmail.com", "john@gmail..com", "john@.gmail.com", "john@gmail.com.",
		"john@-gmail.com", "john@gmail-.com", "john@gmail_com.com", "john(comment)@gmail.com",
		"\"john\"smith@gmail.com", "john@[192.168.0.1]", "john@127.0.0.1",
		"john@gmail.com\n", "john\x00@gmail.com", "john@gmail.com>", "<john@gmail.com>",
		"John Smith <john@gmail.com>", "john@gmail,com", "john;mary@gmail.com",
		"john@xn--zz.com", "john@\u00a0gmail.com", "\xff@gmail.com",
		"john@gmail.com, mary@gmail.com", "mailto:john@gmail.com", "john@ gmail.com",
		strings.Repeat("a", 65) + "@gmail.com", "john@" + strings.Repeat("a", 64) + ".com",
		"john@gmail.c@m", "john\"@gmail.com", "john@gmail.com\u200b",
	}
)

// mixedSet returns a fixed, realistic mix of mixedSize addresses for the
// quick-check benchmarks. It is generated from a fixed seed, so every run
// and every machine benchmarks the same addresses.
var mixedSet = sync.OnceValue(func() []string {
	r := rand.New(rand.NewPCG(13, 1))
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	person := func() string {
		f, l := pick(mixedFirst), pick(mixedLast)
		switch r.IntN(6) {
		case 0:
			return f + "." + l
		case 1:
			return f + l + string(rune('0'+r.IntN(10))) + string(rune('0'+r.IntN(10)))
		case 2:
			return f[:1] + l
		case 3:
			return f + "_" + l
		case 4:
			return f + "." + l + "+" + pick(mixedWords)
		default:
			return f
		}
	}
	company := func() string {
		d := pick(mixedWords)
		if r.IntN(3) == 0 {
			d += "-" + pick(mixedWords)
		}
		if r.IntN(5) == 0 {
			d = "mail." + d
		}
		return d + "." + pick(mixedTLDs)
	}
	// Mixed case, as people type it or as a spreadsheet capitalises it.
	shout := func(s string) string {
		switch r.IntN(12) {
		case 0:
			return strings.ToUpper(s)
		case 1:
			return strings.ToUpper(s[:1]) + s[1:]
		}
		return s
	}
	out := make([]string, 0, mixedSize)
	for len(out) < mixedSize {
		var a string
		switch n := r.IntN(100); {
		case n < 36: // the big providers
			a = person() + "@" + pick(mixedProviders)
		case n < 60: // company and other small or unknown domains
			a = person() + "@" + company()
		case n < 68: // typos of the providers
			a = person() + "@" + pick(mixedTypos)
		case n < 73: // throwaway services
			a = person() + "@" + pick(mixedDisposable)
		case n < 78: // role mailboxes
			a = pick(mixedRoles) + "@" + company()
		case n < 90: // broken syntax
			a = pick(mixedInvalid)
		default: // internationalised domains and local parts
			a = pick(mixedIDN)
		}
		out = append(out, shout(a))
	}
	return out
})

// TestMixedSet keeps the benchmark set honest: it must exercise every path
// of the quick check in about the proportions mixedSet intends.
func TestMixedSet(t *testing.T) {
	t.Parallel()
	set := mixedSet()
	if len(set) != mixedSize {
		t.Fatalf("mixed set has %d addresses, want %d", len(set), mixedSize)
	}
	var invalid, suggested, disposable, free, role, idn, utf8Local, upper int
	rules := map[string]bool{}
	for _, a := range set {
		in := verify.Inspect(a)
		if !in.Valid {
			invalid++
			rules[in.SyntaxRule] = true
			continue
		}
		if in.SuggestedDomain != "" {
			suggested++
		}
		if in.Flags.Disposable {
			disposable++
		}
		if in.Flags.Free {
			free++
		}
		if in.Flags.Role {
			role++
		}
		if in.Address.IDN {
			idn++
		}
		if in.Flags.SMTPUTF8 {
			utf8Local++
		}
		if strings.ContainsAny(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			upper++
		}
	}
	counts := []struct {
		name     string
		got, min int
	}{
		{"invalid", invalid, 80},
		{"suggested", suggested, 50},
		{"disposable", disposable, 30},
		{"free", free, 300},
		{"role", role, 30},
		{"IDN domain", idn, 40},
		{"UTF-8 local part", utf8Local, 30},
		{"mixed case", upper, 50},
		{"distinct syntax rules", len(rules), 12},
	}
	for _, c := range counts {
		t.Logf("%-22s %d", c.name, c.got)
		if c.got < c.min {
			t.Errorf("mixed set has %d %s addresses, want at least %d", c.got, c.name, c.min)
		}
	}
}
