// Command hello is what the tests of package harness build.
package main

import "fmt"

func main() { fmt.Println("hello from a built command") }
