package address_test

import (
	"errors"
	"fmt"

	"github.com/evs-dev/evs/internal/verify/address"
)

func ExampleParse() {
	a, err := address.Parse("  Alice@Bücher.Example ")
	if err != nil {
		panic(err)
	}
	fmt.Println(a, a.IDN, a.UTF8Local)

	_, err = address.Parse("alice@[192.0.2.1]")
	var se *address.SyntaxError
	if errors.As(err, &se) {
		fmt.Println(se.Rule)
	}
	// Output:
	// Alice@xn--bcher-kva.example true false
	// domain_literal
}
