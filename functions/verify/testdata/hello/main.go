// Command hello is the smallest Go Lambda function: the floor the cold
// starts of the real functions are measured against (BenchmarkColdStart).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context, map[string]any) (string, error) { return "hello", nil })
}
