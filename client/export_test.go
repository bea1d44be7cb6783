package client

// Strict makes c refuse replies with fields it does not know: the tests'
// check that the client follows the contract.
func Strict(c *Client) { c.strict = true }
