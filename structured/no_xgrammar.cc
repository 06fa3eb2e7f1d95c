// A build without xgrammar (scripts/setup.sh builds it): every constraint is refused with
// UNIMPLEMENTED, so a request asking for one never gets free text in its place.
#include "structured/check.h"
#include "structured/compiler.h"
#include "structured/compose.h"
#include "structured/token_mask.h"

namespace yoco {
namespace {

Status unavailable(std::string_view field) {
  return Status(StatusCode::kUnimplemented,
                std::string(field) + ": structured outputs need xgrammar, which this build lacks (scripts/setup.sh)");
}

}  // namespace

struct CompiledConstraint {};
struct ConstraintCompiler::Impl {};
struct TokenMask::Impl {};

bool structured_outputs_enabled() { return false; }

int background_compiles() { return 0; }

Status check_structured_output(const StructuredOutput& s, std::string_view field, const StructuredLimits&) {
  return s.constrained() ? unavailable(field) : Status::Ok();
}

Result<StructuredOutput> json_slots_grammar(const std::vector<JsonSlot>&, std::string_view field,
                                            const StructuredLimits&) {
  return unavailable(field);
}

ConstraintCompiler::ConstraintCompiler(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConstraintCompiler::~ConstraintCompiler() = default;

Result<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::create(const std::vector<std::string>& vocab,
                                                                       std::vector<int32_t>, StructuredLimits) {
  return unavailable("vocab");
}

int ConstraintCompiler::vocab_size() const { return 0; }

Result<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::compile(const StructuredOutput&,
                                                                              std::string_view field) {
  return unavailable(field);
}

// Never constructed: nothing compiles without xgrammar.
TokenMask::TokenMask(std::shared_ptr<const CompiledConstraint>, std::span<const int32_t>) { YOCO_CHECK(false); }
TokenMask::~TokenMask() = default;
TokenMask::TokenMask(TokenMask&&) noexcept = default;
TokenMask& TokenMask::operator=(TokenMask&&) noexcept = default;
void TokenMask::apply(float*, int) {}
std::vector<int32_t> TokenMask::allowed() { return {}; }
bool TokenMask::accept(int32_t) { return false; }
bool TokenMask::terminated() const { return true; }

}  // namespace yoco
