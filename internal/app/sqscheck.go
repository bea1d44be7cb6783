package app

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/evs-dev/evs/internal/lambda"
)

// CheckQueue is the cold-start check of the queue q (its URL and where it came
// from), for lambda.Resources.Also: a queue SQS says does not exist is
// one line naming it; other failures are left to the calls.
func CheckQueue(client *sqs.Client, q lambda.Resource) func(ctx context.Context, region, fix string) error {
	return func(ctx context.Context, region, fix string) error {
		if q.Name == "" {
			return nil
		}
		_, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(q.Name), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		_, nq := errors.AsType[*types.QueueDoesNotExist](err)
		if ae, ok := errors.AsType[smithy.APIError](err); nq || ok && ae.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" {
			return lambda.NotFound("SQS queue "+q.Name, q.Source, region, fix)
		}
		return lambda.Unreachable(err, region)
	}
}
